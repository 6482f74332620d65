//! Component selection lists: the value of framework-level parameters such as
//! `btl` or `coll`.
//!
//! Grammar (as in Open MPI): either an include list `self,sm,openib`, which
//! allows only the named components and ranks them in the given order, or an
//! exclusion list `^tcp,openib`, where the single leading `^` negates the whole
//! list. A `^` anywhere else (`self,^tcp`, `^tcp,^openib`) is an error: mixing
//! inclusion and exclusion has no defined meaning. Items are trimmed, must be
//! non-empty, made of ASCII letters, digits, `_` or `-`, and appear at most
//! once. The empty string (or only whitespace) means "no restriction".

use std::fmt;
use std::str::FromStr;

/// Why a selection list did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid selection list {text:?}: {reason}")]
pub struct SelectionError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A parsed selection list. See the module docs for the grammar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum SelectionList {
    /// No restriction: every component may run.
    #[default]
    All,
    /// Only these components, in this order of preference.
    Include(Vec<String>),
    /// Every component except these.
    Exclude(Vec<String>),
}

impl SelectionList {
    /// Parses a selection list.
    pub fn parse(text: &str) -> Result<Self, SelectionError> {
        let err = |reason: String| SelectionError {
            text: text.to_owned(),
            reason,
        };
        let t = text.trim();
        if t.is_empty() {
            return Ok(SelectionList::All);
        }
        let (exclude, body) = match t.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let mut names: Vec<String> = Vec::new();
        for item in body.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(err("empty component name".into()));
            }
            if item.starts_with('^') {
                return Err(err(if exclude {
                    "`^` may appear only once, at the start of the list".into()
                } else {
                    format!(
                        "cannot mix included components and excluded `{item}`; \
                         use either `a,b` or `^a,b`"
                    )
                }));
            }
            if !item
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(err(format!("{item:?} is not a component name")));
            }
            if names.iter().any(|n| n == item) {
                return Err(err(format!("component {item} is listed twice")));
            }
            names.push(item.to_owned());
        }
        Ok(if exclude {
            SelectionList::Exclude(names)
        } else {
            SelectionList::Include(names)
        })
    }

    /// Whether the list lets `component` run.
    pub fn allows(&self, component: &str) -> bool {
        match self {
            SelectionList::All => true,
            SelectionList::Include(names) => names.iter().any(|n| n == component),
            SelectionList::Exclude(names) => !names.iter().any(|n| n == component),
        }
    }

    /// Position of `component` in an include list (0 = most preferred);
    /// `None` for components not in it and for `All`/`Exclude` lists.
    pub fn rank_of(&self, component: &str) -> Option<usize> {
        match self {
            SelectionList::Include(names) => names.iter().position(|n| n == component),
            _ => None,
        }
    }

    /// Filters `components` by this list. An include list yields the allowed
    /// components in the list's order; otherwise the input order is kept.
    pub fn filter<'a>(&self, components: &[&'a str]) -> Vec<&'a str> {
        match self {
            SelectionList::Include(names) => names
                .iter()
                .filter_map(|n| components.iter().find(|c| **c == n.as_str()).copied())
                .collect(),
            _ => components
                .iter()
                .copied()
                .filter(|c| self.allows(c))
                .collect(),
        }
    }

    /// Names in the list that are not among `known` (a typo in `btl=sm,slef`
    /// should be reported, not ignored).
    pub fn unknown_names(&self, known: &[&str]) -> Vec<String> {
        match self {
            SelectionList::All => Vec::new(),
            SelectionList::Include(names) | SelectionList::Exclude(names) => names
                .iter()
                .filter(|n| !known.contains(&n.as_str()))
                .cloned()
                .collect(),
        }
    }
}

impl FromStr for SelectionList {
    type Err = SelectionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SelectionList::parse(s)
    }
}

impl fmt::Display for SelectionList {
    /// Prints the list in the syntax [`SelectionList::parse`] accepts (`All`
    /// prints as the empty string).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectionList::All => Ok(()),
            SelectionList::Include(n) => f.write_str(&n.join(",")),
            SelectionList::Exclude(n) => write!(f, "^{}", n.join(",")),
        }
    }
}
