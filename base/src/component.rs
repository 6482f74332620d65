//! The component registry: which components exist, in which framework, with
//! what priority, and whether each can run on this machine.
//!
//! Every component crate exports one `static` [`ComponentDescriptor`] per
//! component, e.g. in btl-sm:
//! ```
//! use tmpi_base::component::{Availability, ComponentDescriptor};
//! use tmpi_base::mca::{McaError, ParamSpec, Registry};
//!
//! fn register_params(reg: &Registry) -> Result<(), McaError> {
//!     reg.register_size(ParamSpec::new("btl", "sm", "fifo_size").help("FIFO bytes"), 65536)?;
//!     reg.register_verbose("btl", "sm")?;
//!     Ok(())
//! }
//! fn probe() -> Availability {
//!     if std::path::Path::new("/dev/shm").is_dir() {
//!         Availability::Available
//!     } else {
//!         Availability::Unavailable("/dev/shm is missing".into())
//!     }
//! }
//! pub static COMPONENT: ComponentDescriptor = ComponentDescriptor {
//!     framework: "btl",
//!     name: "sm",
//!     priority: 50,
//!     description: "shared-memory transport between processes of one node",
//!     register_params,
//!     probe,
//! };
//! ```
//! and frameworks (and `tmpi_info`) collect them in a [`ComponentRegistry`].
//! A framework then selects its components like this:
//! ```
//! use tmpi_base::component::ComponentRegistry;
//! use tmpi_base::mca::{Registry, Sources};
//!
//! # fn main() -> Result<(), tmpi_base::error::Error> {
//! let reg = Registry::new(Sources::default()); // mca::registry() in a real process
//! let comps = ComponentRegistry::new();        // filled by the crates' providers
//! comps.register_params(&reg)?;
//! let btl = reg.register_selection("btl", "BTL components to use (`self,sm` or `^tcp`)")?;
//! for cand in comps.candidates("btl", btl.get())? {
//!     if cand.availability.is_available() {
//!         // open cand.component ...
//!     } else {
//!         tracing::info!(target: "btl_base", "{} not used: {}", cand.component.name, cand.availability);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Semantics chosen here: `priority` is the static default used to order
//! candidates (higher wins, as in Open MPI); a component may still expose a
//! `<framework>_<component>_priority` parameter and use it in its framework's
//! own selection. `probe` must be cheap, must not panic and must not leave
//! anything behind (no opened devices); it explains a refusal in one line.

use std::fmt;

use crate::error::Error;
use crate::mca::{McaError, Registry, SelectionList};

/// Whether a component can run in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// It can.
    Available,
    /// It cannot, and why (`"libibverbs not found"`).
    Unavailable(String),
}

impl Availability {
    /// `true` for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Available => f.write_str("available"),
            Availability::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// The static description of one component.
#[derive(Debug)]
pub struct ComponentDescriptor {
    /// Framework name (`"btl"`).
    pub framework: &'static str,
    /// Component name (`"sm"`).
    pub name: &'static str,
    /// Default selection priority; higher is preferred.
    pub priority: i32,
    /// One-line description for `tmpi_info`.
    pub description: &'static str,
    /// Registers the component's MCA parameters (idempotent).
    pub register_params: fn(&Registry) -> Result<(), McaError>,
    /// Decides whether the component can run here.
    pub probe: fn() -> Availability,
}

/// What every crate with components or parameters exports (conventionally
/// as `pub fn register`): adds its component descriptors to `comps` and
/// registers its framework-level parameters in `reg`. `tmpi_info` and MPI
/// initialisation call each provider, then
/// [`ComponentRegistry::register_params`].
pub type Provider = fn(&Registry, &mut ComponentRegistry) -> Result<(), Error>;

/// The provider of tmpi-base: registers base's own parameters
/// (`mpi_yield_when_idle`, `mpi_param_check`, `mpi_pack_per_fragment`,
/// `mca_base_verbose`); base has no components.
pub fn register_base(reg: &Registry, _comps: &mut ComponentRegistry) -> Result<(), Error> {
    crate::mca::yield_when_idle(reg)?;
    crate::mca::mpi_param_check(reg)?;
    crate::mca::mpi_pack_per_fragment(reg)?;
    reg.register_verbose("mca", "base")?;
    crate::pmi::register_client(reg)?;
    Ok(())
}

/// For components without parameters: registers nothing.
pub fn no_params(_: &Registry) -> Result<(), McaError> {
    Ok(())
}

/// A component that is allowed by the selection list, with its verdict.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The component.
    pub component: &'static ComponentDescriptor,
    /// Its probe's verdict.
    pub availability: Availability,
}

/// A set of components, typically all components of the process or of one
/// framework.
#[derive(Debug, Default)]
pub struct ComponentRegistry {
    components: Vec<&'static ComponentDescriptor>,
}

impl ComponentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a component. Adding the same descriptor twice is a no-op; a
    /// different descriptor with the same framework and name is an error.
    pub fn add(&mut self, c: &'static ComponentDescriptor) -> Result<(), Error> {
        if let Some(existing) = self.find(c.framework, c.name) {
            if std::ptr::eq(existing, c) {
                return Ok(());
            }
            return Err(Error::Component {
                framework: c.framework.into(),
                component: c.name.into(),
                reason: "two different components have this name".into(),
            });
        }
        self.components.push(c);
        Ok(())
    }

    /// All components, in the order added.
    pub fn components(&self) -> &[&'static ComponentDescriptor] {
        &self.components
    }

    /// Components of `framework`, in the order added.
    pub fn framework<'a>(
        &'a self,
        framework: &'a str,
    ) -> impl Iterator<Item = &'static ComponentDescriptor> + 'a {
        self.components
            .iter()
            .copied()
            .filter(move |c| c.framework == framework)
    }

    /// The component `framework`/`name`.
    pub fn find(&self, framework: &str, name: &str) -> Option<&'static ComponentDescriptor> {
        self.framework(framework).find(|c| c.name == name)
    }

    /// Registers the parameters of every component in `reg`.
    pub fn register_params(&self, reg: &Registry) -> Result<(), McaError> {
        self.components
            .iter()
            .try_for_each(|c| (c.register_params)(reg))
    }

    /// The components of `framework` that `list` allows, each probed, in
    /// preference order: the include list's order if there is one, otherwise
    /// descending priority (ties by name). A name in the list that is not a
    /// component of the framework is an error (a typo must not silently
    /// select nothing). Unavailable candidates are returned too, so callers
    /// can report why a requested component was not used.
    pub fn candidates(
        &self,
        framework: &str,
        list: &SelectionList,
    ) -> Result<Vec<Candidate>, Error> {
        let known: Vec<&str> = self.framework(framework).map(|c| c.name).collect();
        if let Some(bad) = list.unknown_names(&known).into_iter().next() {
            let mut reason = format!("not a known {framework} component");
            let near = crate::mca::nearest(&bad, &known, 3);
            if !near.is_empty() {
                reason.push_str(&format!(" (did you mean {}?)", near.join(" or ")));
            }
            return Err(Error::Component {
                framework: framework.into(),
                component: bad,
                reason,
            });
        }
        let mut out: Vec<&'static ComponentDescriptor> = self
            .framework(framework)
            .filter(|c| list.allows(c.name))
            .collect();
        match list {
            SelectionList::Include(_) => out.sort_by_key(|c| list.rank_of(c.name)),
            _ => out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name))),
        }
        Ok(out
            .into_iter()
            .map(|c| Candidate {
                component: c,
                availability: (c.probe)(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes() -> Availability {
        Availability::Available
    }
    fn no() -> Availability {
        Availability::Unavailable("libibverbs not found".into())
    }
    static SELF_: ComponentDescriptor = ComponentDescriptor {
        framework: "btl",
        name: "self",
        priority: 100,
        description: "loopback",
        register_params: no_params,
        probe: yes,
    };
    static SM: ComponentDescriptor = ComponentDescriptor {
        framework: "btl",
        name: "sm",
        priority: 50,
        description: "shared memory",
        register_params: no_params,
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
    static SM_TWIN: ComponentDescriptor = ComponentDescriptor {
        framework: "btl",
        name: "sm",
        priority: 1,
        description: "impostor",
        register_params: no_params,
        probe: yes,
    };

    fn reg() -> ComponentRegistry {
        let mut r = ComponentRegistry::new();
        r.add(&SM).unwrap();
        r.add(&SELF_).unwrap();
        r.add(&OPENIB).unwrap();
        r
    }

    fn names(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.component.name).collect()
    }

    #[test]
    fn duplicates() {
        let mut r = reg();
        r.add(&SM).unwrap();
        assert_eq!(r.components().len(), 3);
        assert!(r.add(&SM_TWIN).is_err());
    }

    #[test]
    fn candidate_order() {
        let r = reg();
        let all = r.candidates("btl", &SelectionList::All).unwrap();
        assert_eq!(names(&all), ["self", "openib", "sm"]);
        assert_eq!(
            all[1].availability,
            Availability::Unavailable("libibverbs not found".into())
        );
        let inc = r
            .candidates("btl", &SelectionList::parse("sm,self").unwrap())
            .unwrap();
        assert_eq!(names(&inc), ["sm", "self"]);
        let exc = r
            .candidates("btl", &SelectionList::parse("^openib").unwrap())
            .unwrap();
        assert_eq!(names(&exc), ["self", "sm"]);
        let err = r
            .candidates("btl", &SelectionList::parse("self,smm").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("smm") && err.contains("did you mean sm"),
            "{err}"
        );
        assert!(r
            .candidates("coll", &SelectionList::All)
            .unwrap()
            .is_empty());
    }
}
