//! Where parameter values come from: the command line (through
//! [`CMDLINE_ENV`]), `TMPI_MCA_<name>` environment variables, the user and
//! system parameter files, and the built-in default.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::McaError;

/// Environment variable through which `tmpirun` hands all `--mca NAME VALUE`
/// pairs to the ranks, encoded with [`encode_cmdline`]. It deliberately does
/// not start with [`ENV_PREFIX`], so it is never mistaken for a parameter.
pub const CMDLINE_ENV: &str = "TMPI_CMDLINE_MCA";

/// Prefix of environment variables that set a parameter: `TMPI_MCA_<name>`,
/// with `<name>` exactly as registered (e.g. `TMPI_MCA_btl_sm_fifo_size`).
pub const ENV_PREFIX: &str = "TMPI_MCA_";

/// Environment variable naming the installation prefix; the system parameter
/// file is `<prefix>/etc/tmpi-mca-params.conf`. Without it the prefix is the
/// directory above the running executable's directory, if that directory is
/// named `bin` (so `/opt/tmpi/bin/tmpirun` gives `/opt/tmpi`); otherwise there
/// is no system file.
pub const PREFIX_ENV: &str = "TMPI_PREFIX";

/// Environment variable that `tmpirun` sets to `1` when the ranks on this node
/// outnumber its cores. `auto` settings such as `mpi_yield_when_idle` resolve
/// from it (see [`super::Registry::launch_oversubscribed`]).
pub const OVERSUBSCRIBED_ENV: &str = "TMPI_LAUNCH_OVERSUBSCRIBED";

/// Path of the user parameter file below `$HOME`.
pub const USER_FILE: &str = ".tmpi/mca-params.conf";

/// Path of the system parameter file below the prefix.
pub const SYSTEM_FILE: &str = "etc/tmpi-mca-params.conf";

/// Where a parameter's value came from. Ordered from lowest to highest
/// precedence by [`Source::precedence`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The built-in default given at registration.
    Default,
    /// `<prefix>/etc/tmpi-mca-params.conf`, at `line`.
    SystemFile {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// `$HOME/.tmpi/mca-params.conf`, at `line`.
    UserFile {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// The environment variable `var` (`TMPI_MCA_<name>`).
    Environment {
        /// The variable's name.
        var: String,
    },
    /// `tmpirun --mca` (delivered through [`CMDLINE_ENV`]).
    CommandLine,
}

impl Source {
    /// 0 (default) to 4 (command line): a higher number wins.
    pub fn precedence(&self) -> u8 {
        match self {
            Source::Default => 0,
            Source::SystemFile { .. } => 1,
            Source::UserFile { .. } => 2,
            Source::Environment { .. } => 3,
            Source::CommandLine => 4,
        }
    }

    /// One word for the kind of source: `default`, `system-file`, `user-file`,
    /// `env`, `cmdline` (used in `tmpi_info --parsable`).
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::SystemFile { .. } => "system-file",
            Source::UserFile { .. } => "user-file",
            Source::Environment { .. } => "env",
            Source::CommandLine => "cmdline",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::SystemFile { path, line } => {
                write!(f, "system file {}:{line}", path.display())
            }
            Source::UserFile { path, line } => write!(f, "user file {}:{line}", path.display()),
            Source::Environment { var } => write!(f, "environment {var}"),
            Source::CommandLine => f.write_str("command line (--mca)"),
        }
    }
}

/// One `name = value` line of a parameter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Parameter name.
    pub name: String,
    /// Value text (trimmed).
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// A parsed parameter file.
///
/// Format: one `name = value` per line; blank lines and lines whose first
/// non-blank character is `#` are ignored. `#` elsewhere is part of the value.
/// Name and value are trimmed; the value may be empty; a value enclosed in a
/// pair of double quotes has them removed (`name = " a b "` gives ` a b `).
/// A name may appear more than once: the last line wins. Any other line
/// (no `=`, empty name, a name with characters outside `[A-Za-z0-9_]`) is an
/// error naming the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Where the file is (used in sources and messages).
    pub path: PathBuf,
    /// Entries in file order.
    pub entries: Vec<FileEntry>,
}

impl ConfigFile {
    /// Parses file contents; `path` is used only for messages and sources.
    pub fn parse(path: impl Into<PathBuf>, contents: &str) -> Result<Self, McaError> {
        let path = path.into();
        let mut entries = Vec::new();
        for (idx, raw) in contents.lines().enumerate() {
            let line = idx + 1;
            let text = raw.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let malformed = |reason: &str| McaError::MalformedFile {
                path: path.clone(),
                line,
                text: raw.to_owned(),
                reason: reason.to_owned(),
            };
            let Some((name, value)) = text.split_once('=') else {
                return Err(malformed("expected `name = value`"));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(malformed("empty parameter name"));
            }
            if !is_param_name(name) {
                return Err(malformed(
                    "parameter names contain only letters, digits and `_`",
                ));
            }
            let mut value = value.trim();
            if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
                value = &value[1..value.len() - 1];
            }
            entries.push(FileEntry {
                name: name.to_owned(),
                value: value.to_owned(),
                line,
            });
        }
        Ok(ConfigFile { path, entries })
    }

    /// Reads and parses `path`. A file that does not exist is `Ok(None)`; a
    /// file that exists but cannot be read, or is malformed, is an error.
    pub fn load(path: &Path) -> Result<Option<Self>, McaError> {
        match std::fs::read_to_string(path) {
            Ok(contents) => Self::parse(path, &contents).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(McaError::FileRead {
                path: path.to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    /// The last entry for `name`.
    pub fn get(&self, name: &str) -> Option<&FileEntry> {
        self.entries.iter().rev().find(|e| e.name == name)
    }
}

/// Whether `s` is a syntactically valid parameter name (`[A-Za-z0-9_]+`),
/// as accepted in files and by [`decode_cmdline`]. `tmpirun` should check
/// `--mca` names with it before encoding them for the ranks.
pub fn is_param_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Encodes `--mca` pairs into one string for [`CMDLINE_ENV`].
///
/// Format: `name=value` pairs joined by `;`. In names and values the bytes
/// `%`, `=`, `;`, control characters and DEL are written as `%XX` (uppercase
/// hex), so any UTF-8 text round-trips through [`decode_cmdline`]. The empty
/// list encodes as the empty string.
pub fn encode_cmdline(pairs: &[(String, String)]) -> String {
    fn esc(out: &mut String, s: &str) {
        for c in s.chars() {
            if c == '%' || c == '=' || c == ';' || c.is_ascii_control() {
                out.push_str(&format!("%{:02X}", c as u32));
            } else {
                out.push(c);
            }
        }
    }
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        esc(&mut out, k);
        out.push('=');
        esc(&mut out, v);
    }
    out
}

/// Decodes the value of [`CMDLINE_ENV`] (see [`encode_cmdline`]). Pairs keep
/// their order; a name given twice is kept twice (the later one wins when
/// values are resolved). Malformed text is [`McaError::Cmdline`].
pub fn decode_cmdline(s: &str) -> Result<Vec<(String, String)>, McaError> {
    fn unesc(s: &str, whole: &str) -> Result<String, McaError> {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| McaError::Cmdline {
                        text: whole.to_owned(),
                        reason: format!("bad escape at byte {i}"),
                    })?;
                out.push(hex);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).map_err(|_| McaError::Cmdline {
            text: whole.to_owned(),
            reason: "escapes decode to invalid UTF-8".into(),
        })
    }
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(';')
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| McaError::Cmdline {
                text: s.to_owned(),
                reason: format!("pair {pair:?} has no `=`"),
            })?;
            let k = unesc(k, s)?;
            if !is_param_name(&k) {
                return Err(McaError::Cmdline {
                    text: s.to_owned(),
                    reason: format!("{k:?} is not a parameter name"),
                });
            }
            Ok((k, unesc(v, s)?))
        })
        .collect()
}

/// The raw (unparsed) settings of every source, plus the errors met while
/// collecting them. Build it with [`Sources::from_process`] in a real process
/// or piece by piece (`Sources::default().with_env(..).with_user_file(..)`) in
/// tests, so that tests never mutate the process environment.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    cmdline: Vec<(String, String)>,
    env: BTreeMap<String, String>,
    user_file: Option<ConfigFile>,
    system_file: Option<ConfigFile>,
    oversubscribed: bool,
    errors: Vec<McaError>,
    user_path: Option<PathBuf>,
    system_path: Option<PathBuf>,
}

impl Sources {
    /// Sources of the running process: [`CMDLINE_ENV`], `TMPI_MCA_*`,
    /// [`OVERSUBSCRIBED_ENV`], `$HOME/.tmpi/mca-params.conf` and
    /// `<prefix>/etc/tmpi-mca-params.conf` (prefix from [`PREFIX_ENV`], else
    /// derived from the executable's path, see there).
    pub fn from_process() -> Self {
        let mut vars: Vec<(String, String)> = Vec::new();
        let mut errors = Vec::new();
        for (k, v) in std::env::vars_os() {
            let Some(k) = k.to_str() else { continue };
            if !(k.starts_with(ENV_PREFIX)
                || k == CMDLINE_ENV
                || k == OVERSUBSCRIBED_ENV
                || k == PREFIX_ENV
                || k == "HOME")
            {
                continue;
            }
            match v.into_string() {
                Ok(v) => vars.push((k.to_owned(), v)),
                Err(_) => errors.push(McaError::NonUnicodeEnv { var: k.to_owned() }),
            }
        }
        let home = vars
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| !p.as_os_str().is_empty());
        let prefix = vars
            .iter()
            .find(|(k, _)| k == PREFIX_ENV)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| !p.as_os_str().is_empty())
            .or_else(prefix_from_exe);
        let mut s = Self::from_env_and_files(vars, home.as_deref(), prefix.as_deref());
        s.errors.extend(errors);
        s
    }

    /// Sources from an explicit environment (any iterator of variables; only
    /// the relevant ones are kept) and the parameter files below `home` and
    /// `prefix` (each optional), read from disk.
    pub fn from_env_and_files<I, K, V>(vars: I, home: Option<&Path>, prefix: Option<&Path>) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut s = Sources::default().with_env(vars);
        if let Some(home) = home {
            s.user_path = Some(home.join(USER_FILE));
            match ConfigFile::load(&home.join(USER_FILE)) {
                Ok(f) => s.user_file = f,
                Err(e) => s.errors.push(e),
            }
        }
        if let Some(prefix) = prefix {
            s.system_path = Some(prefix.join(SYSTEM_FILE));
            match ConfigFile::load(&prefix.join(SYSTEM_FILE)) {
                Ok(f) => s.system_file = f,
                Err(e) => s.errors.push(e),
            }
        }
        s
    }

    /// Adds environment variables: `TMPI_MCA_<name>` set parameters,
    /// [`CMDLINE_ENV`] is decoded into command-line pairs (appended after any
    /// already present), [`OVERSUBSCRIBED_ENV`] sets the oversubscription
    /// flag. Other variables are ignored. Decoding problems are recorded in
    /// [`Sources::errors`].
    pub fn with_env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        for (k, v) in vars {
            let (k, v) = (k.as_ref(), v.as_ref());
            if let Some(name) = k.strip_prefix(ENV_PREFIX) {
                self.env.insert(name.to_owned(), v.to_owned());
            } else if k == CMDLINE_ENV {
                match decode_cmdline(v) {
                    Ok(pairs) => self.cmdline.extend(pairs),
                    Err(e) => self.errors.push(e),
                }
            } else if k == OVERSUBSCRIBED_ENV {
                match super::value::parse_bool(v) {
                    Ok(b) => self.oversubscribed = b,
                    Err(reason) => self.errors.push(McaError::InvalidEnv {
                        var: k.to_owned(),
                        value: v.to_owned(),
                        reason,
                    }),
                }
            }
        }
        self
    }

    /// Adds `--mca` pairs (later pairs win over earlier ones).
    pub fn with_cmdline(mut self, pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        self.cmdline.extend(pairs);
        self
    }

    /// Sets the user file (`$HOME/.tmpi/mca-params.conf`).
    pub fn with_user_file(mut self, file: ConfigFile) -> Self {
        self.user_path = Some(file.path.clone());
        self.user_file = Some(file);
        self
    }

    /// Sets the system file (`<prefix>/etc/tmpi-mca-params.conf`).
    pub fn with_system_file(mut self, file: ConfigFile) -> Self {
        self.system_path = Some(file.path.clone());
        self.system_file = Some(file);
        self
    }

    /// Sets the oversubscription flag (normally from [`OVERSUBSCRIBED_ENV`]).
    pub fn with_oversubscribed(mut self, yes: bool) -> Self {
        self.oversubscribed = yes;
        self
    }

    /// Errors met while collecting the sources (malformed files, unreadable
    /// files, a corrupt [`CMDLINE_ENV`], non-UTF-8 variables).
    pub fn errors(&self) -> &[McaError] {
        &self.errors
    }

    /// The user file's path (`$HOME/.tmpi/mca-params.conf`) and whether it
    /// was read; `None` without a home directory.
    pub fn user_file_path(&self) -> Option<(&Path, bool)> {
        self.user_path
            .as_deref()
            .map(|p| (p, self.user_file.is_some()))
    }

    /// The system file's path (`<prefix>/etc/tmpi-mca-params.conf`) and
    /// whether it was read; `None` when no prefix is known.
    pub fn system_file_path(&self) -> Option<(&Path, bool)> {
        self.system_path
            .as_deref()
            .map(|p| (p, self.system_file.is_some()))
    }

    /// Whether the launcher reported an oversubscribed node.
    pub fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// The highest-precedence raw setting of `name`, if any source sets it.
    pub fn lookup(&self, name: &str) -> Option<(&str, Source)> {
        self.lookup_all(name).into_iter().next()
    }

    /// Every source's setting of `name`, highest precedence first (within the
    /// command line and within a file only the last occurrence counts).
    pub fn lookup_all(&self, name: &str) -> Vec<(&str, Source)> {
        let mut out = Vec::new();
        if let Some((_, v)) = self.cmdline.iter().rev().find(|(k, _)| k == name) {
            out.push((v.as_str(), Source::CommandLine));
        }
        if let Some(v) = self.env.get(name) {
            out.push((
                v.as_str(),
                Source::Environment {
                    var: format!("{ENV_PREFIX}{name}"),
                },
            ));
        }
        if let Some(f) = &self.user_file {
            if let Some(e) = f.get(name) {
                out.push((
                    e.value.as_str(),
                    Source::UserFile {
                        path: f.path.clone(),
                        line: e.line,
                    },
                ));
            }
        }
        if let Some(f) = &self.system_file {
            if let Some(e) = f.get(name) {
                out.push((
                    e.value.as_str(),
                    Source::SystemFile {
                        path: f.path.clone(),
                        line: e.line,
                    },
                ));
            }
        }
        out
    }

    /// Every name set by some source, each with the source that wins for it,
    /// sorted by name.
    pub fn set_names(&self) -> Vec<(String, Source)> {
        let mut names: Vec<&str> = Vec::new();
        names.extend(self.cmdline.iter().map(|(k, _)| k.as_str()));
        names.extend(self.env.keys().map(String::as_str));
        for f in [&self.user_file, &self.system_file].into_iter().flatten() {
            names.extend(f.entries.iter().map(|e| e.name.as_str()));
        }
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| self.lookup(n).map(|(_, src)| (n.to_owned(), src)))
            .collect()
    }
}

/// `<dir>/..` when the running executable lives in a directory named `bin`.
fn prefix_from_exe() -> Option<PathBuf> {
    prefix_of_exe(&std::env::current_exe().ok()?)
}

/// The installation prefix implied by an executable's path: the parent of
/// its directory when that directory is named `bin`.
pub fn prefix_of_exe(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    if dir.file_name()? == "bin" {
        dir.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_from_exe_path() {
        assert_eq!(
            prefix_of_exe(Path::new("/opt/tmpi/bin/tmpirun")),
            Some(PathBuf::from("/opt/tmpi"))
        );
        assert_eq!(prefix_of_exe(Path::new("/work/target/debug/tmpirun")), None);
        assert_eq!(prefix_of_exe(Path::new("tmpirun")), None);
    }

    #[test]
    fn lookup_all_orders_by_precedence() {
        let s = Sources::default()
            .with_env([("TMPI_MCA_x", "env")])
            .with_system_file(ConfigFile::parse("/s", "x = sys\n").unwrap())
            .with_cmdline([("x".to_owned(), "cmd".to_owned())]);
        let got: Vec<(&str, &str)> = s
            .lookup_all("x")
            .into_iter()
            .map(|(v, src)| (v, src.kind()))
            .collect();
        assert_eq!(
            got,
            [("cmd", "cmdline"), ("env", "env"), ("sys", "system-file")]
        );
        assert!(s.lookup_all("y").is_empty());
    }
}
