//! The parameter registry: registration, resolution and typed handles.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};

use super::selection::SelectionList;
use super::source::{is_param_name, Source, Sources};
use super::value::{ParamType, ParamValue, Tristate, Value};
use super::McaError;

/// Who a parameter is for, as Open MPI's (and MPI_T's) nine info levels.
/// `tmpi_info` shows levels up to a chosen one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Basic information for every user (level 1).
    UserBasic = 1,
    /// Detailed user information (2).
    UserDetail = 2,
    /// Everything a user might want (3).
    UserAll = 3,
    /// Basic tuning knobs (4).
    TunerBasic = 4,
    /// Detailed tuning (5).
    TunerDetail = 5,
    /// All tuning knobs (6).
    TunerAll = 6,
    /// Basic developer settings (7).
    DevBasic = 7,
    /// Detailed developer settings (8).
    DevDetail = 8,
    /// Everything (9).
    DevAll = 9,
}

impl Level {
    /// The level number, 1..=9.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The level for a number 1..=9.
    pub fn from_u8(n: u8) -> Option<Level> {
        Some(match n {
            1 => Level::UserBasic,
            2 => Level::UserDetail,
            3 => Level::UserAll,
            4 => Level::TunerBasic,
            5 => Level::TunerDetail,
            6 => Level::TunerAll,
            7 => Level::DevBasic,
            8 => Level::DevDetail,
            9 => Level::DevAll,
            _ => return None,
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (who, what) = match self {
            Level::UserBasic => ("user", "basic"),
            Level::UserDetail => ("user", "detail"),
            Level::UserAll => ("user", "all"),
            Level::TunerBasic => ("tuner", "basic"),
            Level::TunerDetail => ("tuner", "detail"),
            Level::TunerAll => ("tuner", "all"),
            Level::DevBasic => ("dev", "basic"),
            Level::DevDetail => ("dev", "detail"),
            Level::DevAll => ("dev", "all"),
        };
        write!(f, "{} ({who}/{what})", self.as_u8())
    }
}

/// Identity and documentation of a parameter being registered.
///
/// The full name is `<framework>_<component>_<name>`; an empty component gives
/// a framework-level parameter `<framework>_<name>` (`pml_eager_limit`,
/// `mpi_yield_when_idle`); an empty name too gives the framework's selection
/// parameter `<framework>` (`btl`). Each part consists of lowercase ASCII
/// letters, digits and `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    framework: String,
    component: String,
    name: String,
    help: String,
    level: Level,
}

impl ParamSpec {
    /// A parameter of `component` in `framework` (component may be empty for
    /// framework-level parameters). Help defaults to empty, level to
    /// [`Level::UserBasic`]; set them with [`ParamSpec::help`] and [`ParamSpec::level`].
    pub fn new(framework: &str, component: &str, name: &str) -> Self {
        ParamSpec {
            framework: framework.to_owned(),
            component: component.to_owned(),
            name: name.to_owned(),
            help: String::new(),
            level: Level::UserBasic,
        }
    }

    /// Sets the help text shown by `tmpi_info`.
    pub fn help(mut self, help: &str) -> Self {
        self.help = help.to_owned();
        self
    }

    /// Sets the info level.
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// `<framework>_<component>_<name>`, skipping empty parts.
    pub fn full_name(&self) -> String {
        [&self.framework, &self.component, &self.name]
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("_")
    }

    fn validate(&self) -> Result<(), McaError> {
        let bad = |reason: String| McaError::InvalidName {
            name: self.full_name(),
            reason,
        };
        let part_ok = |p: &str| {
            p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if self.framework.is_empty() {
            return Err(bad("the framework name is empty".into()));
        }
        if self.name.is_empty() && !self.component.is_empty() {
            return Err(bad("a component parameter needs a name".into()));
        }
        for (what, p) in [
            ("framework", &self.framework),
            ("component", &self.component),
            ("parameter", &self.name),
        ] {
            if !part_ok(p) || p.starts_with('_') || p.ends_with('_') {
                return Err(bad(format!(
                    "{what} part {p:?} must be lowercase letters, digits and inner `_`"
                )));
            }
        }
        Ok(())
    }
}

/// A snapshot of one registered parameter, for listings (`tmpi_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    /// Full name (`btl_sm_fifo_size`).
    pub name: String,
    /// Framework part.
    pub framework: String,
    /// Component part (empty for framework-level parameters).
    pub component: String,
    /// Type and constraints.
    pub ty: ParamType,
    /// Built-in default.
    pub default: Value,
    /// Resolved value.
    pub value: Value,
    /// Where the value came from.
    pub source: Source,
    /// Help text.
    pub help: String,
    /// Info level.
    pub level: Level,
}

/// A typed handle to a registered parameter. Cheap to clone; the value was
/// resolved from all sources when the parameter was registered and does not
/// change afterwards.
#[derive(Debug, Clone)]
pub struct Param<T> {
    value: T,
    info: Arc<ParamInfo>,
    _t: PhantomData<fn() -> T>,
}

impl<T: ParamValue> Param<T> {
    /// The resolved value.
    pub fn value(&self) -> T {
        self.value.clone()
    }

    /// The resolved value, by reference.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// Where the value came from.
    pub fn source(&self) -> &Source {
        &self.info.source
    }

    /// Full name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Everything known about the parameter.
    pub fn info(&self) -> &ParamInfo {
        &self.info
    }
}

impl Param<Tristate> {
    /// The effective switch: see [`Tristate::resolve`].
    pub fn resolve(&self, auto_value: bool) -> bool {
        self.value.resolve(auto_value)
    }
}

/// A name set by some source that no component registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownParam {
    /// The name as given.
    pub name: String,
    /// Who set it.
    pub source: Source,
    /// Registered names close to it, nearest first (at most 3).
    pub suggestions: Vec<String>,
}

impl fmt::Display for UnknownParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown MCA parameter {:?} (set by {}) is ignored",
            self.name, self.source
        )?;
        if self.suggestions.is_empty() {
            f.write_str("; no registered parameter has a similar name")
        } else {
            write!(f, "; did you mean {}?", self.suggestions.join(" or "))
        }
    }
}

/// The set of registered parameters and the sources their values come from.
///
/// One process-wide instance lives behind [`super::registry`]; tests build
/// their own with [`Registry::new`] from explicit [`Sources`]. All methods
/// take `&self` and are thread-safe.
#[derive(Debug)]
pub struct Registry {
    sources: Sources,
    params: Mutex<BTreeMap<String, Arc<ParamInfo>>>,
    /// Names whose registration failed on an invalid value: known, but
    /// unusable (so not "unknown").
    rejected: Mutex<BTreeSet<String>>,
}

impl Registry {
    /// A registry resolving values from `sources`.
    pub fn new(sources: Sources) -> Self {
        Registry {
            sources,
            params: Mutex::new(BTreeMap::new()),
            rejected: Mutex::new(BTreeSet::new()),
        }
    }

    /// A registry over [`Sources::from_process`].
    pub fn from_process() -> Self {
        Self::new(Sources::from_process())
    }

    /// The sources values are resolved from.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// Problems met while reading the sources (see [`Sources::errors`]).
    pub fn source_errors(&self) -> &[McaError] {
        self.sources.errors()
    }

    /// Whether `tmpirun` reported that ranks outnumber cores on this node
    /// ([`super::OVERSUBSCRIBED_ENV`] = 1). `auto` switches that depend on
    /// it (`mpi_yield_when_idle`) resolve with
    /// `param.resolve(registry.launch_oversubscribed())`.
    pub fn launch_oversubscribed(&self) -> bool {
        self.sources.oversubscribed()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<ParamInfo>>> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (inserts are single operations), so poisoning is ignored.
        self.params.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers (or re-registers) a parameter and resolves its value.
    ///
    /// Registering the same name again with the same type and default returns
    /// a handle to the existing entry (components may be opened more than
    /// once); a different type or default is [`McaError::Conflict`].
    /// The winning source's text is parsed; if it is invalid the result is
    /// [`McaError::InvalidValue`] (lower-precedence sources are not consulted:
    /// a bad setting is never silently replaced).
    fn register_value<T: ParamValue>(
        &self,
        spec: ParamSpec,
        ty: ParamType,
        default: Value,
    ) -> Result<Param<T>, McaError> {
        spec.validate()?;
        let name = spec.full_name();
        if !ty.admits(&default) {
            return Err(McaError::InvalidDefault {
                name,
                default: default.to_string(),
                expected: ty.expected(),
            });
        }
        let mut shadowed = Vec::new();
        let mut params = self.lock();
        let info = if let Some(existing) = params.get(&name) {
            if existing.ty != ty || existing.default != default {
                return Err(McaError::Conflict {
                    name,
                    reason: format!(
                        "first registered as {} with default {:?}, now as {} with default {:?}",
                        existing.ty.name(),
                        existing.default.to_string(),
                        ty.name(),
                        default.to_string()
                    ),
                });
            }
            existing.clone()
        } else {
            let settings = self.sources.lookup_all(&name);
            let (value, source) = match settings.first() {
                None => (default.clone(), Source::Default),
                Some((text, source)) => match ty.parse(text) {
                    Ok(v) => (v, source.clone()),
                    Err(reason) => {
                        drop(params);
                        self.rejected
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(name.clone());
                        return Err(McaError::InvalidValue {
                            name,
                            value: (*text).to_owned(),
                            expected: format!("{} ({reason})", ty.expected()),
                            origin: source.clone(),
                        });
                    }
                },
            };
            // Overridden settings are not used, but a broken one is still
            // worth a warning: it would bite as soon as the override goes.
            for (text, lower) in settings.iter().skip(1) {
                if let Err(reason) = ty.parse(text) {
                    shadowed.push(format!(
                        "MCA parameter {name}: invalid value {text:?} from {lower} is \
                         overridden by {source}, but would be an error on its own ({reason})"
                    ));
                }
            }
            let info = Arc::new(ParamInfo {
                name: name.clone(),
                framework: spec.framework,
                component: spec.component,
                ty,
                default,
                value,
                source,
                help: spec.help,
                level: spec.level,
            });
            params.insert(name.clone(), info.clone());
            info
        };
        drop(params);
        if info.source != Source::Default {
            tracing::debug!(target: "mca_base", "{} = {} (from {})", info.name, info.value, info.source);
        }
        for w in &shadowed {
            super::warn(w);
        }
        let value = T::from_value(&info.value).ok_or_else(|| McaError::Conflict {
            name,
            reason: "registered with a different Rust type".into(),
        })?;
        Ok(Param {
            value,
            info,
            _t: PhantomData,
        })
    }

    /// Registers a boolean parameter.
    pub fn register_bool(&self, spec: ParamSpec, default: bool) -> Result<Param<bool>, McaError> {
        self.register_value(spec, ParamType::Bool, Value::Bool(default))
    }

    /// Registers a signed integer parameter (any `i64`).
    pub fn register_int(&self, spec: ParamSpec, default: i64) -> Result<Param<i64>, McaError> {
        self.register_int_range(spec, default, i64::MIN..=i64::MAX)
    }

    /// Registers an integer parameter accepting only `range`.
    pub fn register_int_range(
        &self,
        spec: ParamSpec,
        default: i64,
        range: RangeInclusive<i64>,
    ) -> Result<Param<i64>, McaError> {
        let ty = ParamType::Int {
            min: *range.start(),
            max: *range.end(),
        };
        self.register_value(spec, ty, Value::Int(default))
    }

    /// Registers a size (byte count) parameter; values accept K/M/G/T suffixes.
    pub fn register_size(&self, spec: ParamSpec, default: u64) -> Result<Param<u64>, McaError> {
        self.register_value(spec, ParamType::Size, Value::Size(default))
    }

    /// Registers a free-text parameter.
    pub fn register_string(
        &self,
        spec: ParamSpec,
        default: &str,
    ) -> Result<Param<String>, McaError> {
        self.register_value(spec, ParamType::String, Value::String(default.to_owned()))
    }

    /// Registers a parameter taking one of `choices` (matched
    /// case-insensitively; the value is the registered spelling).
    pub fn register_enum(
        &self,
        spec: ParamSpec,
        choices: &[&str],
        default: &str,
    ) -> Result<Param<String>, McaError> {
        let ty = ParamType::Enum {
            choices: choices.iter().map(|c| (*c).to_owned()).collect(),
        };
        self.register_value(spec, ty, Value::Enum(default.to_owned()))
    }

    /// Registers an `auto|1|0` switch.
    pub fn register_tristate(
        &self,
        spec: ParamSpec,
        default: Tristate,
    ) -> Result<Param<Tristate>, McaError> {
        self.register_value(spec, ParamType::Tristate, Value::Tristate(default))
    }

    /// Registers a comma-separated list parameter.
    pub fn register_list(
        &self,
        spec: ParamSpec,
        default: &[&str],
    ) -> Result<Param<Vec<String>>, McaError> {
        let default = default.iter().map(|s| (*s).to_owned()).collect();
        self.register_value(spec, ParamType::List, Value::List(default))
    }

    /// Registers the selection parameter of `framework` (its name is the
    /// framework's: `btl`, `coll`), defaulting to no restriction.
    pub fn register_selection(
        &self,
        framework: &str,
        help: &str,
    ) -> Result<Param<SelectionList>, McaError> {
        let spec = ParamSpec::new(framework, "", "")
            .help(help)
            .level(Level::UserBasic);
        self.register_value(
            spec,
            ParamType::Selection,
            Value::Selection(SelectionList::All),
        )
    }

    /// Registers the verbosity parameter `<framework>_<component>_verbose`
    /// (integer 0..=100, default 0); use component `"base"` for the
    /// framework-wide `<framework>_base_verbose`. [`crate::log`] maps these
    /// to tracing levels.
    pub fn register_verbose(
        &self,
        framework: &str,
        component: &str,
    ) -> Result<Param<i64>, McaError> {
        let help = if component == "base" {
            format!(
                "Verbosity of the {framework} framework and all its components \
                 (0 = errors and warnings only, up to 100)"
            )
        } else {
            format!(
                "Verbosity of the {framework} {component} component; overrides \
                 {framework}_base_verbose (0 = errors and warnings only, up to 100)"
            )
        };
        let spec = ParamSpec::new(framework, component, "verbose")
            .help(&help)
            .level(Level::DevBasic);
        self.register_int_range(spec, 0, 0..=100)
    }

    /// Registers `<framework>_<component>_priority` (integer 0..=100): the
    /// selection priority of a component, defaulting to `default` (normally
    /// the descriptor's static priority). Higher is preferred.
    pub fn register_priority(
        &self,
        framework: &str,
        component: &str,
        default: i64,
    ) -> Result<Param<i64>, McaError> {
        let spec = ParamSpec::new(framework, component, "priority")
            .help(&format!(
                "Selection priority of the {framework} {component} component (higher wins)"
            ))
            .level(Level::TunerDetail);
        self.register_int_range(spec, default, 0..=100)
    }

    /// A registered parameter by full name.
    pub fn get(&self, name: &str) -> Option<ParamInfo> {
        self.lock().get(name).map(|i| (**i).clone())
    }

    /// All registered parameters, sorted by name.
    pub fn params(&self) -> Vec<ParamInfo> {
        self.lock().values().map(|i| (**i).clone()).collect()
    }

    /// Names set by some source (command line, environment, files) that no
    /// component registered, with the nearest registered names. Names whose
    /// registration failed on an invalid value are not included (that
    /// failure was already an error). Call after every component has
    /// registered its parameters.
    pub fn unknown(&self) -> Vec<UnknownParam> {
        let params = self.lock();
        let rejected = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        let known: Vec<&str> = params.keys().map(String::as_str).collect();
        self.sources
            .set_names()
            .into_iter()
            .filter(|(n, _)| !params.contains_key(n) && !rejected.contains(n))
            .map(|(name, source)| UnknownParam {
                suggestions: nearest(&name, &known, 3),
                name,
                source,
            })
            .collect()
    }
}

/// Up to `max` names from `known` close to `name`, nearest first (by
/// case-insensitive edit distance, ties by name). Close means an edit
/// distance of at most max(2, len/3), or one name being a prefix of the
/// other when both have at least 4 characters (a truncated `btl_sm_prio`
/// still finds `btl_sm_priority`).
pub fn nearest(name: &str, known: &[&str], max: usize) -> Vec<String> {
    let lname = name.to_ascii_lowercase();
    let limit = (lname.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = known
        .iter()
        .filter(|k| is_param_name(k))
        .filter_map(|k| {
            let lk = k.to_ascii_lowercase();
            let d = edit_distance(&lname, &lk);
            let prefix = lname.len() >= 4
                && lk.len() >= 4
                && (lk.starts_with(&lname) || lname.starts_with(&lk));
            (d <= limit || prefix).then_some((d, *k))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(max)
        .map(|(_, k)| k.to_owned())
        .collect()
}

/// Levenshtein distance over bytes (names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn nearest_names() {
        let known = ["btl_sm_fifo_size", "btl_sm_priority", "pml_eager_limit"];
        assert_eq!(
            nearest("btl_sm_fifo_sise", &known, 3),
            vec!["btl_sm_fifo_size"]
        );
        assert_eq!(
            nearest("BTL_SM_FIFO_SIZE", &known, 3),
            vec!["btl_sm_fifo_size"]
        );
        assert!(nearest("zzz", &known, 3).is_empty());
        assert_eq!(nearest("btl_sm_prio", &known, 3), vec!["btl_sm_priority"]);
        assert_eq!(
            nearest("btl_sm", &known, 1),
            vec!["btl_sm_priority"],
            "nearest of the prefix matches first"
        );
    }

    #[test]
    fn spec_names() {
        assert_eq!(
            ParamSpec::new("btl", "sm", "fifo_size").full_name(),
            "btl_sm_fifo_size"
        );
        assert_eq!(
            ParamSpec::new("pml", "", "eager_limit").full_name(),
            "pml_eager_limit"
        );
        assert_eq!(ParamSpec::new("btl", "", "").full_name(), "btl");
        assert!(ParamSpec::new("Btl", "sm", "x").validate().is_err());
        assert!(ParamSpec::new("btl", "sm", "").validate().is_err());
        assert!(ParamSpec::new("", "sm", "x").validate().is_err());
        assert!(ParamSpec::new("btl", "s-m", "x").validate().is_err());
    }
}
