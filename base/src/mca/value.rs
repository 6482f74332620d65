//! Parameter types, values, and the parsers that turn user text into values.
//!
//! Accepted spellings (all parsers trim surrounding whitespace; keywords are
//! case-insensitive):
//! - **bool**: `1 true yes on enabled` / `0 false no off disabled`.
//! - **integer**: optional sign, decimal digits, or `0x`-prefixed hex; an optional
//!   inclusive range given at registration is enforced.
//! - **size**: an unsigned byte count with an optional binary suffix `K`, `M`, `G`,
//!   `T` (×1024ⁿ, either case), optionally followed by `B` or `iB`
//!   (`64K`, `64KiB`, `4m`, `1G`, `512`). Overflow of `u64` is an error.
//! - **tristate**: `auto` or any bool spelling.
//! - **enum**: one of the registered choices (exact, case-insensitive match;
//!   the canonical registered spelling is stored).
//! - **list**: comma-separated items, each trimmed; the empty string is the
//!   empty list; an empty item (`a,,b`) is an error.
//! - **selection**: see [`SelectionList`].
//! - **string**: taken verbatim (no trimming).

use std::fmt;

use super::selection::SelectionList;

/// The value of a three-way switch such as `btl_openib_tm_enable` or
/// `mpi_yield_when_idle`: `auto` lets the library decide from the
/// circumstances, `1` forces on, `0` forces off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tristate {
    /// Decide at run time (see [`Tristate::resolve`]).
    Auto,
    /// Forced on.
    On,
    /// Forced off.
    Off,
}

impl Tristate {
    /// The effective switch: `On`/`Off` as set, `Auto` becomes `auto_value`
    /// (what the circumstances call for, e.g. "the device has TM caps" or
    /// "the launch is oversubscribed").
    pub fn resolve(self, auto_value: bool) -> bool {
        match self {
            Tristate::Auto => auto_value,
            Tristate::On => true,
            Tristate::Off => false,
        }
    }
}

impl fmt::Display for Tristate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tristate::Auto => "auto",
            Tristate::On => "1",
            Tristate::Off => "0",
        })
    }
}

/// The type of a registered parameter, with its constraints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamType {
    /// Boolean.
    Bool,
    /// Signed 64-bit integer within `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Byte count (u64) with K/M/G/T suffixes.
    Size,
    /// Free text.
    String,
    /// One of a fixed set of words.
    Enum {
        /// The accepted words, in registration order.
        choices: Vec<String>,
    },
    /// `auto` | `1` | `0`.
    Tristate,
    /// Comma-separated list of words.
    List,
    /// Component selection list (`self,sm` or `^tcp`).
    Selection,
}

impl ParamType {
    /// Short type name as printed by `tmpi_info` (`bool`, `int`, `size`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::Bool => "bool",
            ParamType::Int { .. } => "int",
            ParamType::Size => "size",
            ParamType::String => "string",
            ParamType::Enum { .. } => "enum",
            ParamType::Tristate => "tristate",
            ParamType::List => "list",
            ParamType::Selection => "selection",
        }
    }

    /// What a valid value looks like, used in error messages and by `tmpi_info`.
    pub fn expected(&self) -> String {
        match self {
            ParamType::Bool => "a boolean (1/0, true/false, yes/no, on/off)".into(),
            ParamType::Int { min, max } if *min == i64::MIN && *max == i64::MAX => {
                "an integer".into()
            }
            ParamType::Int { min, max } => format!("an integer in {min}..={max}"),
            ParamType::Size => {
                "a size in bytes with optional suffix K, M, G or T (e.g. 4096, 64K, 2M)".into()
            }
            ParamType::String => "a string".into(),
            ParamType::Enum { choices } => format!("one of {}", choices.join("|")),
            ParamType::Tristate => "one of auto|1|0".into(),
            ParamType::List => "a comma-separated list of non-empty items".into(),
            ParamType::Selection => {
                "a component list like `self,sm` or an exclusion list like `^tcp,openib`".into()
            }
        }
    }

    /// Parses `text` as a value of this type. The error is a description of
    /// what went wrong; the caller adds the parameter name and source.
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        match self {
            ParamType::Bool => parse_bool(text).map(Value::Bool),
            ParamType::Int { min, max } => {
                let v = parse_int(text)?;
                if v < *min || v > *max {
                    return Err(format!("{v} is out of range {min}..={max}"));
                }
                Ok(Value::Int(v))
            }
            ParamType::Size => parse_size(text).map(Value::Size),
            ParamType::String => Ok(Value::String(text.to_owned())),
            ParamType::Enum { choices } => {
                let t = text.trim();
                choices
                    .iter()
                    .find(|c| c.eq_ignore_ascii_case(t))
                    .map(|c| Value::Enum(c.clone()))
                    .ok_or_else(|| format!("{t:?} is not one of the choices"))
            }
            ParamType::Tristate => parse_tristate(text).map(Value::Tristate),
            ParamType::List => parse_list(text).map(Value::List),
            ParamType::Selection => SelectionList::parse(text)
                .map(Value::Selection)
                .map_err(|e| e.to_string()),
        }
    }

    /// Whether `v` is a value of this type satisfying its constraints
    /// (used to validate registration defaults).
    pub fn admits(&self, v: &Value) -> bool {
        match (self, v) {
            (ParamType::Bool, Value::Bool(_))
            | (ParamType::Size, Value::Size(_))
            | (ParamType::String, Value::String(_))
            | (ParamType::Tristate, Value::Tristate(_))
            | (ParamType::Selection, Value::Selection(_)) => true,
            (ParamType::Int { min, max }, Value::Int(i)) => i >= min && i <= max,
            (ParamType::Enum { choices }, Value::Enum(s)) => choices.contains(s),
            (ParamType::List, Value::List(items)) => {
                items.iter().all(|i| !i.is_empty() && !i.contains(','))
            }
            _ => false,
        }
    }
}

/// A parameter value of any type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// [`ParamType::Bool`].
    Bool(bool),
    /// [`ParamType::Int`].
    Int(i64),
    /// [`ParamType::Size`], in bytes.
    Size(u64),
    /// [`ParamType::String`].
    String(String),
    /// [`ParamType::Enum`]: the canonical choice.
    Enum(String),
    /// [`ParamType::Tristate`].
    Tristate(Tristate),
    /// [`ParamType::List`].
    List(Vec<String>),
    /// [`ParamType::Selection`].
    Selection(SelectionList),
}

impl fmt::Display for Value {
    /// Formats the value so that parsing the output with the same type gives
    /// it back (sizes are printed in bytes).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => f.write_str(if *b { "true" } else { "false" }),
            Value::Int(i) => write!(f, "{i}"),
            Value::Size(s) => write!(f, "{s}"),
            Value::String(s) | Value::Enum(s) => f.write_str(s),
            Value::Tristate(t) => write!(f, "{t}"),
            Value::List(items) => f.write_str(&items.join(",")),
            Value::Selection(s) => write!(f, "{s}"),
        }
    }
}

/// Parses a boolean (see the module docs for the accepted words).
pub fn parse_bool(text: &str) -> Result<bool, String> {
    let t = text.trim().to_ascii_lowercase();
    match t.as_str() {
        "1" | "true" | "yes" | "on" | "enabled" => Ok(true),
        "0" | "false" | "no" | "off" | "disabled" => Ok(false),
        _ => Err(format!("{:?} is not a boolean", text.trim())),
    }
}

/// Parses `auto` or a boolean.
pub fn parse_tristate(text: &str) -> Result<Tristate, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(Tristate::Auto);
    }
    parse_bool(text)
        .map(|b| if b { Tristate::On } else { Tristate::Off })
        .map_err(|_| format!("{:?} is not auto, 1 or 0", text.trim()))
}

/// Parses a signed integer, decimal or `0x` hex.
pub fn parse_int(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let magnitude = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{t:?} is not an integer"));
        }
        u64::from_str_radix(hex, 16).map_err(|_| format!("{t:?} does not fit in 64 bits"))?
    } else {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{t:?} is not an integer"));
        }
        digits
            .parse::<u64>()
            .map_err(|_| format!("{t:?} does not fit in 64 bits"))?
    };
    if neg {
        if magnitude <= i64::MAX as u64 + 1 {
            Ok((magnitude as i128).wrapping_neg() as i64)
        } else {
            Err(format!("{t:?} does not fit in 64 bits"))
        }
    } else {
        i64::try_from(magnitude).map_err(|_| format!("{t:?} does not fit in 64 bits"))
    }
}

/// Parses a byte count with an optional binary suffix (see module docs).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.bytes().take_while(|b| b.is_ascii_digit()).count();
    if digits_end == 0 {
        return Err(format!("{t:?} is not a size (expected digits first)"));
    }
    let (digits, suffix) = t.split_at(digits_end);
    let base: u64 = digits
        .parse()
        .map_err(|_| format!("{t:?} does not fit in 64 bits"))?;
    let suffix = suffix.trim_start();
    let mut chars = suffix.chars();
    let shift = match chars.next() {
        None => return Ok(base),
        Some('k' | 'K') => 10,
        Some('m' | 'M') => 20,
        Some('g' | 'G') => 30,
        Some('t' | 'T') => 40,
        Some('b' | 'B') if chars.as_str().is_empty() => return Ok(base),
        Some(_) => return Err(format!("{t:?} has an unknown size suffix {suffix:?}")),
    };
    match chars.as_str() {
        "" | "b" | "B" | "ib" | "iB" | "IB" | "Ib" => {}
        _ => return Err(format!("{t:?} has an unknown size suffix {suffix:?}")),
    }
    base.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{t:?} does not fit in 64 bits"))
}

/// Parses a comma-separated list.
pub fn parse_list(text: &str) -> Result<Vec<String>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    t.split(',')
        .map(|item| {
            let item = item.trim();
            if item.is_empty() {
                Err(format!("{t:?} contains an empty item"))
            } else {
                Ok(item.to_owned())
            }
        })
        .collect()
}

/// Rust types that a typed [`super::Param`] can hold. Implemented for the
/// value types of every [`ParamType`]; not meant to be implemented outside
/// this crate.
pub trait ParamValue: Clone + Send + Sync + 'static {
    /// Extracts `Self` from a [`Value`] of the matching variant.
    fn from_value(v: &Value) -> Option<Self>;
}

impl ParamValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}
impl ParamValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}
impl ParamValue for u64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Size(s) => Some(*s),
            _ => None,
        }
    }
}
impl ParamValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) | Value::Enum(s) => Some(s.clone()),
            _ => None,
        }
    }
}
impl ParamValue for Vec<String> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::List(l) => Some(l.clone()),
            _ => None,
        }
    }
}
impl ParamValue for Tristate {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Tristate(t) => Some(*t),
            _ => None,
        }
    }
}
impl ParamValue for SelectionList {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Selection(s) => Some(s.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64kib"), Ok(64 << 10));
        assert_eq!(parse_size(" 2M "), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("3TB"), Ok(3 << 40));
        assert_eq!(parse_size("7B"), Ok(7));
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("1KX").is_err());
        assert!(parse_size("1.5M").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("18446744073709551616").is_err());
    }

    #[test]
    fn ints() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int("-42"), Ok(-42));
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("0x10"), Ok(16));
        assert_eq!(parse_int("-9223372036854775808"), Ok(i64::MIN));
        assert!(parse_int("9223372036854775808").is_err());
        assert!(parse_int("-9223372036854775809").is_err());
        assert!(parse_int("12a").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("0x").is_err());
        assert!(parse_int("--1").is_err());
    }

    #[test]
    fn bools_and_tristates() {
        for t in ["1", "true", "YES", "On", "enabled"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "false", "no", "OFF", "disabled"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        assert!(parse_bool("2").is_err());
        assert_eq!(parse_tristate("auto"), Ok(Tristate::Auto));
        assert_eq!(parse_tristate("1"), Ok(Tristate::On));
        assert_eq!(parse_tristate("0"), Ok(Tristate::Off));
        assert!(parse_tristate("maybe").is_err());
        assert!(Tristate::Auto.resolve(true));
        assert!(!Tristate::Auto.resolve(false));
        assert!(!Tristate::Off.resolve(true));
        assert!(Tristate::On.resolve(false));
    }

    #[test]
    fn lists_and_roundtrip() {
        assert_eq!(parse_list(""), Ok(vec![]));
        assert_eq!(
            parse_list("a, b ,c"),
            Ok(vec!["a".into(), "b".into(), "c".into()])
        );
        assert!(parse_list("a,,b").is_err());
        let ty = ParamType::Size;
        let v = ty.parse("64K").unwrap();
        assert_eq!(ty.parse(&v.to_string()).unwrap(), v);
    }
}
